"""Kills itself with SIGKILL during the second epoch of fit."""

import os
import signal

import keras
import numpy as np


class Killer(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if self.params and getattr(self, "_epoch", 0) == 1 and batch == 5:
            os.kill(os.getpid(), signal.SIGKILL)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch


model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(np.zeros((640, 8)), np.zeros((640, 1)), batch_size=32, epochs=3, verbose=0, callbacks=[Killer()])
