import threading
import time


def alloc_lists(n):
    return [list(range(1000)) for _ in range(n)]


def keep_busy(seconds):
    end = time.time() + seconds
    data = []
    while time.time() < end:
        data.append(alloc_lists(20))
        if len(data) > 50:
            data.clear()


def sleeper():
    time.sleep(0.3)


t = threading.Thread(target=sleeper)
t.start()
keep_busy(0.4)
t.join()
