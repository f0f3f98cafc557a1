"""What gpucap knows before any question: GPU datasheets, model architectures read from their config.json files, and prices. Reads data; no physics."""

from typing import TYPE_CHECKING

from gpucap.lazy import public_names

if TYPE_CHECKING:
    from gpucap.catalog.gpus import GPU as GPU
    from gpucap.catalog.gpus import add_gpu_file as add_gpu_file
    from gpucap.catalog.gpus import get_gpu as get_gpu
    from gpucap.catalog.gpus import load_gpus as load_gpus
    from gpucap.catalog.lookup import load_model as load_model
    from gpucap.catalog.lookup import model_cards as model_cards
    from gpucap.catalog.models import ModelSpec as ModelSpec
    from gpucap.catalog.prices import read_prices as read_prices

__getattr__, __dir__, __all__ = public_names(__name__, __file__)
