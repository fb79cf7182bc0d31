"""A plain parent that runs a Keras fit in a Python subprocess."""

import subprocess
import sys

code = ("import numpy as np, keras\n"
        "m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])\n"
        "m.compile('sgd', 'mse')\n"
        "m.fit(np.zeros((256, 8)), np.zeros((256, 1)), epochs=2, verbose=0)\n")
sys.exit(subprocess.run([sys.executable, "-c", code]).returncode)
