import sys

from tatu.daemon.main import main

sys.exit(main())
