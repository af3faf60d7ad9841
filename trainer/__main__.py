import os
import sys

from trainer.library_logs import lean_process

lean_process()  # a process of our own: Keras loads without the packages it imports for APIs we never call

from trainer.cli import main  # noqa: E402

code = main()
if code in (130, 143):
    # Ctrl-C (or SIGTERM): it interrupts JAX's wait for a compilation, not the compilation, which goes on in XLA's
    # threads; the interpreter torn down under them was a segmentation fault (exit 139). Everything is closed by now.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone, a stream closed: nothing more to say
            pass
    os._exit(code)
sys.exit(code)
