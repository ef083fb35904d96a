"""Example data shipped with tansaku (read with ``importlib.resources``): a fictional mini-wiki, fictional
laws in the e-Gov v3 schema, a general chat set, and the scripted teacher / agent used by ``synth demo``.
"""
