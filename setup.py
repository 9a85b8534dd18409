# cffi's build hook (cffi_modules) is only honoured from setup.py; all other
# metadata lives in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["mmsuite/_cbuild.py:ffibuilder"])
