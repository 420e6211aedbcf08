import sys

# The signal handlers before anything heavy loads: a SIGTERM during the imports is a stop, not a kill.
from tatu.daemon import signals

signals.install()

from tatu.daemon.main import cli  # noqa: E402

sys.exit(cli())
