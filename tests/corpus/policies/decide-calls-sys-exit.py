# expect: decide: policy corpus: raised SystemExit: 0
import sys


class Corpus:
    name = 'corpus'

    def decide(self, view):
        sys.exit(0)
