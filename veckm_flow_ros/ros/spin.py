# Copyright 2026 The veckm_flow_ros Authors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""The process around a node: start, spin until shutdown, report start-up errors in one line."""

import signal
import sys

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

# rcl's errors (rclpy.init with a missing --params-file): the C extension's exception type.
RCLError = _rclpy.RCLError


def check_params_files(args):
    """
    Raise ValueError naming a --params-file of args that is missing or no YAML.

    rcl would say so too, but after a log line of its own and as an exception with source
    locations; this names the file once.
    """
    import yaml
    for flag, path in zip(args, args[1:]):
        if flag != '--params-file':
            continue
        try:
            with open(path, encoding='utf-8') as stream:
                yaml.safe_load(stream)
        except OSError as error:
            raise ValueError(f'--params-file {path}: {error.strerror}') from None
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            reason = ' '.join(str(error).split())
            raise ValueError(f'--params-file {path}: not a YAML file ({reason})') from None


def run_node(make_node, executable: str, args=None) -> int:
    """
    Build the node with make_node(), spin it until Ctrl-C / SIGTERM; return the exit status.

    Start-up problems (a parameter out of range, a missing model) print one line
    `<executable>: error: ...` and return 1, without a traceback.
    """
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        # Ctrl-C takes SIGTERM's path: rclpy's handler (chained before this no-op) shuts the
        # context down and the executor returns, instead of a KeyboardInterrupt landing at any
        # bytecode (inside rclpy's executor it leaves half-built Tasks behind).
        signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        check_params_files(sys.argv if args is None else args)
        rclpy.init(args=args)
    except ValueError as error:
        print(f'{executable}: error: {error}', file=sys.stderr)
        return 1
    except RCLError as error:  # a missing or malformed --params-file, bad --ros-args
        # rcl's message ends in source locations (', at /project/src/...'): not the user's.
        message = ' '.join(str(error).split()).split(', at /')[0]
        print(f'{executable}: error: {message}', file=sys.stderr)
        return 1
    node = None
    try:
        # The executor before the node: a stop signal while the node starts (the model loads)
        # shuts the context down, and an executor built after that fails half-way (rclpy
        # Jazzy then prints a traceback from its __del__ at exit).
        executor = SingleThreadedExecutor()
        node = make_node()
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass  # Ctrl-C / SIGTERM, also while the node starts: a normal stop
    except (ValueError, FileNotFoundError, rclpy.exceptions.ParameterException) as error:
        print(f'{executable}: error: {error}', file=sys.stderr)
        return 1
    except Exception:  # noqa: B902 - only to tell a stop during start-up from a failure
        if rclpy.ok():
            raise
        # Ctrl-C / SIGTERM during start-up (e.g. while the model loads): rclpy's signal
        # handler shut the context down, so creating the publishers failed (RCLError
        # 'context is invalid'): a normal stop.
    finally:
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0
