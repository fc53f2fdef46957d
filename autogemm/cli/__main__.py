"""`python -m autogemm.cli`: the `autogemm` command."""
import sys

from autogemm.cli import main

sys.exit(main())
