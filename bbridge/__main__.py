import sys

from bbridge.cli import main

sys.exit(main())
