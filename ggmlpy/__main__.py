"""`python -m ggmlpy`: the command line (ggmlpy/cli/main.py)."""
import sys

from .cli.main import main

sys.exit(main())
