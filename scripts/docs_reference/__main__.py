"""`python -m scripts.docs_reference [OUTDIR]`: write the reference pages."""

import sys

from scripts.docs_reference import main

sys.exit(main())
