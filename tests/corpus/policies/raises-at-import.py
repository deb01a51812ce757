# expect: policy 'corpus': FILE failed to load: KeyError: 'CLUSTER_BUDGET'
import os

BUDGET = os.environ['CLUSTER_BUDGET']
