"""The benchmark's trivial function: the same code Runplane and the FastAPI peer serve."""


def run(name="world"):
    return {"hello": name}
