"""The chat page in a real browser: headless Chromium (the Debian packages `chromium` and `chromium-driver`, which
.ci/run installs) driven by Selenium. The model is a bigram model scripted to answer, over and over,
`A **bold** `code` <script>alert(1)</script>.`, so the test knows what must stream in and how it must look."""

import re
import shutil
import time
import urllib.request

import pytest

from helpers.bigram_model import scripted_llama
from tinyllm import LLM
from tinyllm.server import create_app
from tinyllm.server.model_slots import ModelSource
from tinyllm.server.transport.server_thread import ServerThread

try:
    from selenium import webdriver
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # the browser tests skip; the others run
    webdriver = None

REPLY = "A **bold** `code` <script>alert(1)</script>."
TOKENS_PER_REPLY = 18  # the scripted cut of REPLY into tokens
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
needs_browser = pytest.mark.skipif(
    webdriver is None or BROWSER is None or DRIVER is None,
    reason="no headless browser here: install selenium (the test extra) and the Debian packages chromium and "
    "chromium-driver (.ci/run does)",
)


@pytest.fixture(scope="module")
def llm(smollm_tokenizer, one_thread):
    newline = smollm_tokenizer.encode("\n", add_special_tokens=False)[-1]  # the chat template's last token
    model = scripted_llama(smollm_tokenizer, REPLY, after=newline, cycle=True, max_position_embeddings=8192)
    return LLM.from_parts(model, smollm_tokenizer)


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1200,900",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    yield driver
    driver.quit()


def served(llm, **options):
    return ServerThread(create_app(llm, served_model_name="scripted", **options)).start().wait_ready()


def aborted(url: str) -> float:
    text = urllib.request.urlopen(f"{url}/metrics").read().decode()
    return float(re.search(r'tinyllm_requests_finished_total\{finish_reason="abort"\} (\S+)', text).group(1))


def open_page(driver, url: str, max_tokens: int | None = None):
    driver.get(f"{url}/")
    if max_tokens is not None:
        driver.find_element(By.ID, "settings-toggle").click()
        field = driver.find_element(By.ID, "max_tokens")
        field.clear()
        field.send_keys(str(max_tokens))


def say(driver, text: str):
    box = driver.find_element(By.ID, "prompt")
    box.send_keys(text)
    driver.find_element(By.ID, "send").click()


def last_reply(driver):
    return driver.find_elements(By.CSS_SELECTOR, ".message.assistant")[-1]


def wait(driver, condition, seconds: float = 60):
    return WebDriverWait(driver, seconds, poll_frequency=0.05).until(lambda d: condition())


@pytest.mark.slow
@needs_browser
def test_a_reply_streams_in_and_stop_aborts_it(llm, browser):
    srv = served(llm)
    try:
        before = aborted(srv.url)
        open_page(browser, srv.url, max_tokens=6000)
        wait(browser, lambda: browser.find_element(By.ID, "model").text == "scripted")
        say(browser, "Hello")
        body = lambda: last_reply(browser).find_element(By.CLASS_NAME, "body").text  # noqa: E731
        wait(browser, lambda: "alert(1)" in body())  # text arrived while the request still runs
        assert browser.find_element(By.ID, "stop").is_enabled()
        browser.find_element(By.ID, "stop").click()
        wait(browser, lambda: last_reply(browser).find_element(By.CLASS_NAME, "status").text == "stopped")
        wait(browser, lambda: aborted(srv.url) == before + 1, seconds=30)
        shown = body()
        time.sleep(0.5)
        assert body() == shown and len(shown) < len(REPLY) * 6000 // TOKENS_PER_REPLY  # nothing more came
        assert browser.find_element(By.ID, "send").is_enabled() and not browser.find_element(By.ID, "stop").is_enabled()
    finally:
        srv.stop()


@needs_browser
@pytest.mark.slow
def test_model_text_is_shown_as_text_with_markdown_rendered_safely(llm, browser):
    srv = served(llm)
    try:
        open_page(browser, srv.url, max_tokens=TOKENS_PER_REPLY)
        say(browser, "Show me some markup")
        status = lambda: last_reply(browser).find_element(By.CLASS_NAME, "status").text  # noqa: E731
        wait(browser, lambda: "length" in status())
        assert re.fullmatch(rf"{TOKENS_PER_REPLY} tokens · [\d.]+ tok/s · length", status())
        reply = last_reply(browser)
        assert reply.find_element(By.CLASS_NAME, "body").text == "A bold code <script>alert(1)</script>."
        assert reply.find_element(By.TAG_NAME, "strong").text == "bold"
        assert reply.find_element(By.TAG_NAME, "code").text == "code"
        assert not browser.find_elements(By.CSS_SELECTOR, "#messages script")
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018 (the script never ran)
    finally:
        srv.stop()


@pytest.mark.slow
@needs_browser
def test_on_a_server_of_several_models_the_page_asks_the_one_chosen(llm, smollm_tokenizer, browser):
    newline = smollm_tokenizer.encode("\n", add_special_tokens=False)[-1]
    other = scripted_llama(smollm_tokenizer, "Plain words.", after=newline, cycle=True, max_position_embeddings=8192)
    sources = [
        ModelSource("first", llm=llm, aliases=frozenset(), preload=True),
        ModelSource("second", llm=LLM.from_parts(other, smollm_tokenizer), aliases=frozenset()),
    ]
    srv = ServerThread(create_app(models=sources)).start().wait_ready()
    try:
        open_page(browser, srv.url, max_tokens=len(smollm_tokenizer.encode("Plain words.", add_special_tokens=False)))
        wait(browser, lambda: browser.find_element(By.ID, "models").is_displayed())
        choice = Select(browser.find_element(By.ID, "models"))
        assert [o.text for o in choice.options] == ["first", "second"]
        choice.select_by_visible_text("second")
        assert browser.find_element(By.ID, "model").text == "second"
        say(browser, "Hi")
        wait(browser, lambda: "length" in last_reply(browser).find_element(By.CLASS_NAME, "status").text)
        assert last_reply(browser).find_element(By.CLASS_NAME, "body").text == "Plain words."
    finally:
        srv.stop()


@needs_browser
@pytest.mark.slow
def test_the_page_asks_for_the_key_and_then_answers(llm, browser):
    srv = served(llm, api_key="sesame")
    try:
        open_page(browser, srv.url, max_tokens=TOKENS_PER_REPLY)
        wait(browser, lambda: browser.find_element(By.ID, "key-form").is_displayed())
        say(browser, "Hello")
        browser.find_element(By.ID, "key").send_keys("sesame")
        browser.find_element(By.CSS_SELECTOR, "#key-form button").click()
        wait(browser, lambda: "length" in last_reply(browser).find_element(By.CLASS_NAME, "status").text)
        assert "<script>alert(1)</script>" in last_reply(browser).text
        assert browser.find_element(By.ID, "model").text == "scripted"
        assert len(browser.find_elements(By.CSS_SELECTOR, ".message.assistant")) == 1
    finally:
        srv.stop()


def test_the_page_and_its_assets_come_from_the_server_alone(llm):
    srv = served(llm, api_key="sesame")
    try:
        with urllib.request.urlopen(f"{srv.url}/") as r:  # no key needed for the page itself
            html = r.read().decode()
            policy = r.headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "connect-src 'self'" in policy
        sources = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert sources and all(s.startswith("/chat/") for s in sources)
        for s in sources:
            with urllib.request.urlopen(f"{srv.url}{s}") as r:
                assert r.status == 200 and not re.search(rb"https?://\w", r.read())  # no other host named
    finally:
        srv.stop()


def test_head_answers_as_ollamas_clients_check_a_server(llm):
    srv = served(llm)
    try:
        request = urllib.request.Request(f"{srv.url}/", method="HEAD")
        with urllib.request.urlopen(request) as r:
            assert r.status == 200 and r.read() == b""
    finally:
        srv.stop()
