"""Neural-network building blocks: Module, Parameter, layers, losses, init and functional forms."""

from . import functional, init, utils  # noqa: F401
from .layers import *  # noqa: F401,F403
from .module import IncompatibleKeys, Module, StateDictMismatchError  # noqa: F401
from .parameter import Parameter  # noqa: F401
from .registry import module_class, register_module, registered_names  # noqa: F401
from .spec import module_from_spec, module_to_spec  # noqa: F401
from . import parallel  # noqa: F401,E402
