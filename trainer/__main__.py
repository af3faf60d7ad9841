import sys

from trainer.library_logs import lean_process

lean_process()  # a process of our own: Keras loads without the packages it imports for APIs we never call

from trainer.cli import main  # noqa: E402

sys.exit(main())
