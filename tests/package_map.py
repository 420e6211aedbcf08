"""pyproject.toml's package map, read where the tests need it: the one source of truth for which
folder installs as which package (test_imports' layers, test_packaging, test_docs_paths)."""
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]

# package -> folder, every entry of [tool.setuptools.package-dir] (sub-packages too)
PACKAGE_DIR: dict[str, str] = dict(SETUPTOOLS["package-dir"])
# what [tool.setuptools] packages lists for the wheel
LISTED: list[str] = list(SETUPTOOLS["packages"])
# tatu and its top-level packages (tatu.model -> model, ...): the layers; sub-packages lie in their folders
TOP_LEVEL: dict[str, str] = {name: folder for name, folder in PACKAGE_DIR.items() if name.count(".") <= 1}
# the folders that install as tatu.X: importing one bare ("import model") must fail
INSTALLED_AS_TATU_X: tuple[str, ...] = tuple(folder for name, folder in TOP_LEVEL.items() if name != "tatu")
