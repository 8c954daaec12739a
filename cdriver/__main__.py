"""`python -m cdriver`."""

from cdriver.cli import main

main()
