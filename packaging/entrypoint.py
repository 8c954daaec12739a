"""Entry point of the packaged `cdriver` executable."""

from cdriver.cli import main

if __name__ == "__main__":
    main()
