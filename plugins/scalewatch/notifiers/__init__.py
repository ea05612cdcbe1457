"""Alert backends, one module each; `registry.py` names them."""
