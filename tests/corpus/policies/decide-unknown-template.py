# expect: decide: policy corpus: launch names unknown template 'nope'
from clustermgr.policy import Launch


class Corpus:
    name = 'corpus'

    def decide(self, view):
        return view.proposed.add(Launch('nope', 1, 'x'))
