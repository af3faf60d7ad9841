import sys

from trainer.benchmark.cli import main

sys.exit(main())
