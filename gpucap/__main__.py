import sys

from gpucap.cli.main import main

sys.exit(main())
