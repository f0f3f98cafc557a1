import sys

from gpucap.cli import main

sys.exit(main())
