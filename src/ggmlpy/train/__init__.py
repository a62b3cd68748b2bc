"""Training utilities: data loading, the fit loop and its callbacks, GGUF model files."""
from .callbacks import early_stopping, scheduler_step
from .data import ag_dataloader
from .fit import ag_evaluate, ag_fit
from .metrics import ag_accuracy, ag_predict
from .serialization import ag_load_model, ag_save_model

__all__ = ["ag_accuracy", "ag_dataloader", "ag_evaluate", "ag_fit", "ag_load_model", "ag_predict", "ag_save_model",
           "early_stopping", "scheduler_step"]
