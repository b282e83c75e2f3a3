"""The drain benchmark's no-op function."""


def run():
    return None
