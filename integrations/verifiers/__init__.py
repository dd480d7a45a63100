"""agentenvs environments for verifiers (``verifiers.v1``) and so for prime-rl.

:mod:`agentenvs.integrations.verifiers.environment` holds the taskset, its config and the
environment; ``package/`` is the environment package verifiers' loader imports by its taskset id
(``agentenvs-verifiers``). verifiers pins ``openai<3`` and ``mcp==2.0.0``, which the ``[all]``
install does not hold: install it in a venv of its own (``make test-verifiers`` builds one)::

    pip install 'agentenvs[verifiers,babyai,webshop,alfworld]' ./integrations/verifiers/package
    vf-eval agentenvs-verifiers --env.taskset.env TextCraft-v0 -n 10 --model MODEL \\
        --client.base-url http://127.0.0.1:8000/v1
"""
