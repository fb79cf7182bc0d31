import sys

from tensorgauge.cli import main

sys.exit(main())
