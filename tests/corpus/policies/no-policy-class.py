# expect: policy 'corpus': FILE has no class with name = 'corpus' and decide()
class Other:
    name = 'other'

    def decide(self, view):
        return view.proposed
