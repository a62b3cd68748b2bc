"""The command line (`python -m ggmlpy`), the demos and info(): the top layer, which may use every other."""
