//! A future polled only when it woke its task itself, not each time something else did.
//!
//! A connection's task waits in one `tokio::select!` on hyper's connection and on its guards:
//! the idle and head timers and the server's `closing` token. `select!` polls every branch each
//! time the task wakes, and the connection wakes it for every request's read and write, so each
//! call polled both timers and the token again (the token's poll takes a lock every connection
//! shares): about 900 instructions a call of the ~39,000 (issue 40). Wrapped here, a guard is
//! polled on its first poll and then only after its own waker fired, and the task's waker is
//! handed to it again only after that waker was used (or the task's waker changed): a register
//! is two atomic operations on a line the waking thread writes, three guards at each of a call's
//! wakes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

pin_project_lite::pin_project! {
    /// `fut`, polled only on the first poll and after its own waker fired.
    pub(super) struct WhenWoken<F> {
        #[pin]
        fut: F,
        flag: Arc<Flag>,
        // The waker `fut` is polled with: made once, it wakes `flag`.
        waker: Waker,
        // The task's waker as last registered in `flag`, while it is still there (a wake takes
        // it).
        registered: Option<Waker>,
    }
}

/// Whether the wrapped future's waker fired since it was last polled, and the task to wake.
struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // The flag first: the task, once woken, must find it set.
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F> WhenWoken<F> {
    pub(super) fn new(fut: F) -> Self {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(flag.clone());
        Self {
            fut,
            flag,
            waker,
            registered: None,
        }
    }
}

impl<F: Future> Future for WhenWoken<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        loop {
            // Registered before the flag is read: a wake between the two still reaches this
            // task.
            if !this
                .registered
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                this.flag.task.register(cx.waker());
                *this.registered = Some(cx.waker().clone());
            }
            if !this.flag.woken.load(Ordering::Acquire)
                || !this.flag.woken.swap(false, Ordering::AcqRel)
            {
                return Poll::Pending;
            }
            // The wake that set the flag took (or is taking) the registered waker: registered
            // again before the flag is read again.
            *this.registered = None;
            if let Poll::Ready(out) = this.fut.as_mut().poll(&mut Context::from_waker(this.waker)) {
                return Poll::Ready(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts its polls; ready once `ready` is set, and then wakes through the waker it kept.
    struct Counted {
        polls: Arc<AtomicUsize>,
        ready: Arc<AtomicBool>,
        kept: Arc<parking_lot::Mutex<Option<Waker>>>,
    }

    impl Future for Counted {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.ready.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.kept.lock() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    /// A [`Counted`] future wrapped, the handles to what it counts and keeps, and a task's
    /// waker counting its wakes.
    struct Guarded {
        guarded: Pin<Box<WhenWoken<Counted>>>,
        polls: Arc<AtomicUsize>,
        ready: Arc<AtomicBool>,
        kept: Arc<parking_lot::Mutex<Option<Waker>>>,
        task_woken: Arc<TaskWakes>,
        task_waker: Waker,
    }

    impl Guarded {
        fn new() -> Self {
            let polls = Arc::new(AtomicUsize::new(0));
            let ready = Arc::new(AtomicBool::new(false));
            let kept = Arc::new(parking_lot::Mutex::new(None));
            let guarded = Box::pin(WhenWoken::new(Counted {
                polls: polls.clone(),
                ready: ready.clone(),
                kept: kept.clone(),
            }));
            let task_woken = Arc::new(TaskWakes(AtomicUsize::new(0)));
            let task_waker = Waker::from(task_woken.clone());
            Self {
                guarded,
                polls,
                ready,
                kept,
                task_woken,
                task_waker,
            }
        }
    }

    /// Polled once at first; woken by something else (the task's own waker), it is not polled
    /// again; woken through its own waker, it is, and the task is woken.
    #[test]
    fn polls_the_future_only_when_its_own_waker_fired() {
        let Guarded {
            mut guarded,
            polls,
            ready,
            kept,
            task_woken,
            task_waker,
        } = Guarded::new();
        let mut cx = Context::from_waker(&task_waker);
        assert!(guarded.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 1, "the first poll reaches it");
        for _ in 0..5 {
            assert!(guarded.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "other wakes do not reach it"
        );
        ready.store(true, Ordering::SeqCst);
        let own = kept.lock().take();
        own.expect("it kept a waker").wake();
        assert_eq!(
            task_woken.0.load(Ordering::SeqCst),
            1,
            "its wake wakes the task"
        );
        assert!(guarded.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    /// The task's waker is registered once, not at every poll; a wake uses it up, and the next
    /// wake of the future (after it was polled and is pending again) still reaches the task.
    #[test]
    fn every_wake_of_the_future_reaches_the_task() {
        let Guarded {
            mut guarded,
            polls,
            ready: _,
            kept,
            task_woken,
            task_waker,
        } = Guarded::new();
        let mut cx = Context::from_waker(&task_waker);
        for round in 1..=3 {
            for _ in 0..3 {
                assert!(guarded.as_mut().poll(&mut cx).is_pending());
            }
            assert_eq!(polls.load(Ordering::SeqCst), round, "polled once a wake");
            kept.lock().take().expect("it kept a waker").wake();
            assert_eq!(
                task_woken.0.load(Ordering::SeqCst),
                round,
                "wake {round} reaches the task"
            );
        }
        // A task whose waker changed (moved to another task) is woken through the new one.
        let other = Arc::new(TaskWakes(AtomicUsize::new(0)));
        let other_waker = Waker::from(other.clone());
        assert!(
            guarded
                .as_mut()
                .poll(&mut Context::from_waker(&other_waker))
                .is_pending()
        );
        kept.lock().take().expect("it kept a waker").wake();
        assert_eq!(other.0.load(Ordering::SeqCst), 1, "the new waker is woken");
        assert_eq!(task_woken.0.load(Ordering::SeqCst), 3);
    }

    struct TaskWakes(AtomicUsize);

    impl Wake for TaskWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}
