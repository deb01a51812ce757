# expect: policy 'corpus': FILE:5: invalid Python: expected ':'
class Corpus:
    name = 'corpus'

    def decide(self, view)
        return view.proposed
