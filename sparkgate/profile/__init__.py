"""The profile boundary: a profile file read strictly (loading), validated once into frozen models (model,
safe_types), judged by the cross-field rules over its final launch (rules, context), every refusal one
line naming the file and field (problems)."""
