"""A synchronous example: POST /v4/p-demo/hello/run with {"name": "world"}."""


def run(name: str = "world", run_id: str = "") -> dict:
    print(f"greeting {name}")  # captured and logged with the run id
    return {"message": f"Hello, {name}!", "run_id": run_id}


async def shout(text: str) -> str:
    return text.upper()


def _private_helper() -> None:
    """Not callable over HTTP: names starting with _ answer 404."""
