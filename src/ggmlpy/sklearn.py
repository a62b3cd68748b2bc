"""scikit-learn estimators over ggml: `from ggmlpy.sklearn import GGMLClassifier, GGMLRegressor`
(needs scikit-learn: pip install ggmlpy[sklearn]). They live in ggmlpy.extras.sklearn."""
from .extras.sklearn import GGMLClassifier, GGMLRegressor

__all__ = ["GGMLClassifier", "GGMLRegressor"]
