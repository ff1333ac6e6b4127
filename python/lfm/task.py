"""`@lfm.task`: a function whose every call runs in the node's lfm serve, from any engine."""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Optional, TypeVar, Union, overload

from .calls import Options, Size
from .executor import call

F = TypeVar("F", bound=Callable[..., Any])


def in_serve() -> bool:
    """True inside a call that lfm serve runs (the client sets LFM_IN_SERVE on the serves it
    starts): there an @lfm.task function is already limited, and runs directly."""
    return os.environ.get("LFM_IN_SERVE") == "1"


@overload
def task(fn: F) -> F: ...
@overload
def task(
    fn: None = None, *, memory: Size = ..., cores: Size = ..., wall: Size = ...,
    processes: Size = ..., disk: Size = ..., gpus: Optional[int] = ...,
    gpu_memory: Size = ..., category: Optional[str] = ...,
    pack: Union[bool, str] = ..., auto: bool = ..., max_retries: Optional[int] = ...,
    context: Union[str, Callable[[], Any], None] = ..., reuse: bool = ...,
) -> Callable[[F], F]: ...


def task(
    fn: Optional[Callable[..., Any]] = None,
    *,
    memory: Size = None,
    cores: Size = None,
    wall: Size = None,
    processes: Size = None,
    disk: Size = None,
    gpus: Optional[int] = None,
    gpu_memory: Size = None,
    category: Optional[str] = None,
    pack: Union[bool, str] = False,
    auto: bool = False,
    max_retries: Optional[int] = None,
    context: Union[str, Callable[[], Any], None] = None,
    reuse: bool = False,
) -> Any:
    """Run each call of the function in the node's `lfm serve` under these limits.

    The call returns the function's value; it raises lfm.LimitExceeded (with `.report`) when
    a limit was hit, or the function's own exception with the remote traceback as its cause.
    Parsl's `parsl_resource_specification` keyword, if an engine passes one, is dropped.
    `context`: an initialiser (a module-level function taking no arguments, or its
    "module:qualname") that fills module globals the function reads: the node's zygote runs
    it once and calls fork with its state (docs/python.md "Contexts"). `reuse`: each call
    may run in the process an earlier call of the function ran in, its globals as that call
    left them (docs/python.md "Reused processes")."""
    options = Options(
        memory=memory, cores=cores, wall=wall, processes=processes, disk=disk, gpus=gpus,
        gpu_memory=gpu_memory, category=category, pack=pack, auto=auto, max_retries=max_retries,
        context=context, reuse=reuse,
    )

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            kwargs.pop("parsl_resource_specification", None)
            if in_serve():
                return function(*args, **kwargs)
            return call(function, args, kwargs, options).result()

        run.lfm_options = options  # type: ignore[attr-defined]
        return run  # type: ignore[return-value]

    return decorate(fn) if fn is not None else decorate
