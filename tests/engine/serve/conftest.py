from __future__ import annotations

import openai
import pytest

from tests.engine.serve.serving import Served


@pytest.fixture(scope="module")
def served(tiny_folder):
    running = Served(tiny_folder)
    yield running
    running.close()


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0, timeout=120)
