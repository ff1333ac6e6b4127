import os
import sys

# The runner is imported from the source tree, as lfm writes it out beside its entry script.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
