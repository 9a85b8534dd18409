"""The built C ladder: one cffi extension per rung of csrc/, ``<name>`` for
csrc/NN_<name>.c (built by ``mmsuite._cbuild``)."""
