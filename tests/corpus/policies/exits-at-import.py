# expect: policy 'corpus': FILE called sys.exit(3) while loading
import sys

sys.exit(3)
