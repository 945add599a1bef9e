from langswap.cli import main
import sys

sys.exit(main())
