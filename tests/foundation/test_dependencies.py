"""The dependency choices pyproject.toml makes on purpose stay made."""

import importlib.metadata
import warnings


def test_pynvml_comes_from_nvidia_ml_py_not_the_deprecated_shim():
    assert importlib.metadata.packages_distributions()["pynvml"] == ["nvidia-ml-py"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        import pynvml  # noqa: F401 - the shim package warns on import; the real module does not


def test_cbor2_stays_below_6_while_pycose_needs_it():
    major, minor = (int(x) for x in importlib.metadata.version("cbor2").split(".")[:2])
    assert (major, minor) == (5, 9), "pycose 1.1.0 cannot decode with cbor2 >= 6 (pycose issue #141)"


def test_psycopg_is_3_with_its_bundled_libpq():
    import psycopg
    assert psycopg.__version__.startswith("3.3.")
    assert psycopg.pq.__impl__ == "binary", "psycopg[binary] bundles libpq: no system library needed"
