"""Ray for the tests: the package or the reason it cannot run (strict under CI, which installs
.[dev,hf,ray]). The local cluster itself is the session fixture `ray_cluster` (tests/conftest.py):
Ray allows one `ray.init` per process, so every test module shares it."""
from __future__ import annotations


def ray_or_skip():
    try:
        import ray
    except ImportError:
        from strict import cannot_run  # CI installs .[dev,hf,ray]: there the test must run

        cannot_run("ray is not installed: pip install 'tatu[ray]' (make test installs it)")
    return ray
