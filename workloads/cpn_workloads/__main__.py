import sys

from cpn_workloads.run import main

sys.exit(main())
