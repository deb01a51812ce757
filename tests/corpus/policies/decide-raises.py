# expect: decide: policy corpus: raised ZeroDivisionError: division by zero
class Corpus:
    name = 'corpus'

    def decide(self, view):
        return 1 / 0
