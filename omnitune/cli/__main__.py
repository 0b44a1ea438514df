import sys

from omnitune.cli.commands import main

sys.exit(main())
