# expect: decide: policy corpus: did not decide within 0.5 s
import time


class Corpus:
    name = 'corpus'

    def decide(self, view):
        time.sleep(3)
        return view.proposed
