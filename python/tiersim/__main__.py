"""`python -m tiersim` is the `tiersim` command."""

from tiersim.cli import main

main()
