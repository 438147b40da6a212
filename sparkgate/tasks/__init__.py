"""invoke collections; the top-level tasks.py only assembles them."""
