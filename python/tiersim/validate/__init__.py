"""Holding tiersim against reference systems (docs/validate.md)."""

# What `tiersim validate linux --work-factor` (validate_linux's `work_factor`) may be: here, so
# that the CLI's option parser has it without importing the validation at start-up.
WORK_FACTOR_RANGE = (0.05, 20.0)
