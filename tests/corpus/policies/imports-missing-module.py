# expect: policy 'corpus': FILE failed to load: ModuleNotFoundError: No module named 'numpyy'
import numpyy  # noqa: F401
