"""Holds the submitting server's only slot until it is cancelled."""
import time


def run(seconds=600):
    time.sleep(seconds)
    return None
