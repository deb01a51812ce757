"""Cloud providers behind one seam; see base.py. Each SDK is imported only by its own module."""
