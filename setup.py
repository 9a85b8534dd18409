# cffi's build hook (cffi_modules) is only honoured from setup.py; all other
# metadata lives in pyproject.toml. The build file lists one module per C rung.
from runpy import run_path

from setuptools import setup

setup(cffi_modules=run_path("mmsuite/_cbuild.py")["CFFI_MODULES"])
