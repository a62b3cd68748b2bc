"""`python -m ggmlpy`: the command line (ggmlpy/cli/main.py)."""
import sys

from .cli.main import main

if __name__ == "__main__":  # importing the module (documentation tools do) runs nothing
    sys.exit(main())
