# expect: decide: policy corpus: returned list, not a ScaleDecision
class Corpus:
    name = 'corpus'

    def decide(self, view):
        return ['launch', 5]
