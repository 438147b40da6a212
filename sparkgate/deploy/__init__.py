"""`invoke deploy`: preflight, render, up, wait with progress, prove, admit; and its companions."""
